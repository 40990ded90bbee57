# scripts/sluicepy: the Python side of sluice (safetensors, tiny checkpoints,
# byte-level BPE, the container decoder, the PyTorch reference models).
# Independent of the C++ code by design: it reads only files and FORMAT.md.


class SluiceError(Exception):
    """A file or argument is wrong; the message names which one and why."""
