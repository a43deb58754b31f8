"""AI Runtime jobs (seed 000): the job queue, its state machine and protocol.

``domain`` (vocabulary, hashing, errors), ``schemas`` (output JSON Schemas),
``validation`` (argument checks), ``repository`` (the queue's SQL: conditional
updates, fencing, expiry), ``credentials`` (keys encrypted at rest),
``queue`` (:class:`AiJobQueue`: one transaction per operation) and
``sweeper`` (the expiry timer). Free of Flask and nameko; nothing in line
control imports it, and it imports nothing from line control. The gateway
serves it straight from PostgreSQL, in every one of its processes.
"""
