"""Pure. The engine-neutral vocabulary that core/, wire/, backends/ and front ends share.

It imports nothing of ours but `smg_trio.errors`."""
