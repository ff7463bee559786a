"""Attention and row softmax over key rows longer than one program holds: the exact
passes over key blocks (:mod:`.keyblocks`), their tiles (:mod:`.keyblock_tiles`), and
fast mode's one-pass online softmax (:mod:`.flash`)."""
