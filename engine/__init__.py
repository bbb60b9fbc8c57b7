"""Start, watch and stop inference engines: docker images, local vLLM, the embedded simulator."""
