"""Reading and checking ``settings.WHOS_ONLINE``: the settings, their defaults and rules."""
