"""The northbound publisher (PRODUCT.md, "Northbound: MQTT and Sparkplug B";
docs/uns.md): every line of the plant as a Sparkplug B edge node (and/or JSON
topics) on an MQTT broker, with each line's event log as its outbox.

``publisher`` (the process, one per plant), ``node`` (a line's MQTT session,
births, live and historical transactions, acknowledgements), ``outbox`` (the
database: the log, ``uns_node``, the publisher lock), ``model`` (what a line
publishes), ``port`` (the formats: ``sparkplug``, ``json_topics``), ``commands``
(refusals, audited), ``proto`` (the generated Sparkplug B schema)."""
