"""The virtual lab: BMC simulator, simulated and virtual servers, traffic.

Never imported by the pack.
"""
