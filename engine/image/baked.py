"""What an engine image was built as; the image recipe rewrites this file inside the image.

A source tree carrying a different `POLICY` and bind-mounted over the image's engine package
(`--overlay`) changes what the image runs, exactly as a fix's source tree over a fork's
installed package does.
"""

#: scheduler policy the image runs: "base" (the fork) or "fix"
POLICY = "base"
#: what the image serves: "sim" (the simulated engine) or "patched" (vLLM with the plugin)
ENGINE = "sim"
