"""The agents' HTTP: one HTTP/1.1 stack with two faces, the SSE decoder, and the event loop.

- ``wire``: the stack. One request per connection, written in one go and parsed in C by
  httptools as it arrives; the connect and read timeouts and the naming of every failure
  live there and nowhere else.
- ``client``: the streaming face. ``stream_chat`` records a chat completion's SSE chunks
  into a ``StreamResult`` straight from the connection's protocol and turns each failure into
  the turn's outcome; it never raises.
- ``transport``: the httpx face. ``LeanTransport`` puts the same stack under an ordinary
  ``httpx.AsyncClient`` for the calls made around the streams (the preflight's model list,
  ``/tokenize``); the stack's failures become httpx's exceptions.
- ``sse``: the decoder and the result it fills (pure). ``loop``: uvloop or asyncio.

Why two faces and not one: a stream is read once per token, and httpx's response iterator
wakes a coroutine for every read. Streaming through httpx even on this stack costs about 1.7
times the CPU per token of the streaming face, while recording nothing
(``benchmarks/client_overhead.py --clients floor,httpx-lean,stallkit``). The calls around the
streams are few per turn, and their callers (the preflight, the token counter) speak httpx's
requests, responses and exceptions, which they keep. Both faces sit on the one stack, so a
response is framed, timed and failed by one piece of code.
"""
