"""The served model: a Hugging Face model folder (`folder.py`, I/O), the `tokenizers` adapter
(`hf_tokenizer.py`, pure) and the shipped `demo_model/`."""
