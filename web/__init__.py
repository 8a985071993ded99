"""The web edge: the gallery, the dashboard and a person's own page, behind Login with Discord.

An edge like ``cogs/``, beside it: it knows aiohttp's web server and Jinja2, turns an HTTP request
into a use-case call and the outcome into a page, and decides no rule. From the core it imports
only ``framecast.app`` (``tests/test_layers.py`` holds it to that); who a person is in a server
comes from the chat side through :class:`framecast.app.ServerDirectory`, which ``bot.py`` hands in.
"""
