"""Log serving for stored sessions, as pure functions over an index and a store.

* :mod:`.globs` - split and match ``glob=`` patterns over the stored file names;
* :mod:`.categories` - Ray's log categories (``worker_out``, ``raylet``, ...);
* :mod:`.params` - query-parameter parsing and validation for ``/api/v0/logs/file``;
* :mod:`.resolve` - filename / task / actor / pid / node-ip to one object key;
* :mod:`.tail` - last-N-lines from ranged reads, windowed streaming, ANSI filtering;
* :mod:`.disposition` - ``Content-Disposition`` headers.
"""
