"""The host side: everything done on the server itself, through Ansible (ansible-playbook).

ansible_run       run a playbook, structured per-host results
playbook_process  one ansible-playbook process: argv, time limit, the callback's events
playbook_steps    drain, undrain, health, kernel settings, probe, counters (one method each)
osgate            whether a rebooting host's OS can answer yet, as its BMC shows it
"""
