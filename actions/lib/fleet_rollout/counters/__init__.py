"""NIC drop counters: host-side collection, Prometheus source, metric definition, deltas.

* :mod:`.collector` - stdlib-only host collector (also the home of the text parsers)
* :mod:`.parsers`   - the parsers, for library code
* :mod:`.metric`    - which counters are "drops" and which are "packets" (profile setting)
* :mod:`.deltas`    - window deltas with reboot (boot_id), 32-bit wrap and reset handling
* :mod:`.prometheus` - the same windows from a Prometheus server (node_exporter metrics)
"""
