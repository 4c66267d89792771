"""Pure. Decisions about requests: prepare, finalize, detokenize, stop scanning, render."""
