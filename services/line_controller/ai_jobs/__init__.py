"""AI Runtime jobs (seed 000): the job queue, its state machine and protocol.

``domain`` (vocabulary, hashing, errors), ``schemas`` (output JSON Schemas),
``repository`` (the queue's SQL: conditional updates, fencing, expiry),
``credentials`` (keys encrypted at rest) are free of nameko; ``entrypoints``
exposes them as the line_controller's ``ai_*`` RPCs and the sweeper timer.
"""
