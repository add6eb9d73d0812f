"""What whos_online keeps in Redis: the keys, the Lua scripts and the calls that read and write
them, each taking the client it is given (the request path's, failing open; the cleanup's,
failing loudly)."""
