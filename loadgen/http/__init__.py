"""The agents' HTTP: the streaming client (never raises), the SSE decoder, the fast wire and its
httpx transport, and the event loop the agents run on.
"""
