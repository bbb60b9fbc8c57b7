"""One launcher per engine kind: attach to a running engine, a local `vllm serve`, the patched
engine (the plugin in a local vLLM), the simulator as a child process, a docker image (with
its daemon's facts), and the tiny model real vLLM serves on CPU.
"""
