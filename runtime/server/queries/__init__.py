"""Dashboard data queries for stored sessions: option parsing, SQL over the session
index (:mod:`runtime.server.index.schema`) and pure rendering of Ray's answers.

Nothing here imports Flask request state; views pass query arguments in and send
the bytes these functions return.
"""
