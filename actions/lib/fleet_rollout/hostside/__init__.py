"""The host side: everything done on the server itself, through Ansible (ansible-runner).

ansible_run  run a playbook, structured per-host results
operations   drain, undrain, health, kernel settings, probe, counters (one function each)
"""
