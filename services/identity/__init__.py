"""People: local users (argon2id hashes), sign-in sessions, the sign-in
throttle, LDAP, and the access audit. Used by the gateway directly (as
``services.ai_jobs`` is) and by ``linectl users``; no Flask, no nameko.

* ``passwords``: hashing and the equal-work check for unknown users;
* ``users``: the user table and its changes (a change ends the user's sessions);
* ``sessions``: server-side sessions with idle and absolute limits;
* ``throttle``: failed sign-ins per user name, counted in the database;
* ``ldap``: the optional directory (search, bind as the user, role from groups);
* ``signin``: one sign-in attempt through all of the above;
* ``audit``: who did what, written and read;
* ``bootstrap``: the first ``admin`` and its generated password.
"""
