"""Event collection: parse (pure), spool (disk-first), upload, and the HTTP receiver."""
