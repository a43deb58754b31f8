"""The Sparkplug B payload schema, generated from Eclipse Tahu's ``sparkplug_b.proto``
(see the header of ``sparkplug_b_pb2``). Tests' host application decodes with it too."""
