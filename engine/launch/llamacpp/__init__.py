"""llama.cpp's server as a second real engine: its build from the llama-cpp-python sdist
(`build`), a tiny random-weight GGUF model to serve (`model`), and the `llamacpp:MODEL.gguf`
launcher (`launcher`). Each module is imported on its own, so `kit --help` imports none."""
