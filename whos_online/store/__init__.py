"""What whos_online keeps in Redis: the Lua scripts and the calls that read and write it, each
taking the client it is given (the request path's, failing open; the cleanup's, failing
loudly). The keys' names are ``backend.keyspace``'s."""
