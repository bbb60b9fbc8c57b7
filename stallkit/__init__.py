"""stallkit: multi-agent load tests, live stall detection and A/B runs for inference engines.

One import name for the whole project. The repository keeps its role folders at the top
(`contract/`, `engine/`, `loadgen/`, `monitor/`, `kits/`, `reports/`); this package reaches
them as `stallkit.contract`, `stallkit.engine`, ... (links in a source tree, real folders in
the wheel and the engine image), so nothing generic lands at the top of site-packages. A role
imported by its bare name (`import engine` from a checkout's root) is refused by its own
`__init__` (`stallkit.contract.faces.public_face`). Nothing here is needed at run time: an
engine image that bind-mounts only `engine/` and `contract/` imports them as a namespace
package.
"""
