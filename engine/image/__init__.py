"""The engine image: an offline-built container that takes the fork's launch profile.

`recipe` builds the image (a Debian root file system, this Python and the engine package);
`entrypoint` turns the image's environment (PROFILE, PORT, TP, MAX_NUM_SEQS, ...) into the
simulator's or the patched vLLM's command line; `baked` holds what the recipe fixed when it
built the image (the policy and the engine).
"""
