"""ChatOps in the lab: an IRC server (Debian's ngircd), errbot with the err-stackstorm plugin
talking to the runtime's st2 API, and a small IRC client that plays the SRE.

Modules: `ircd` (ngircd), `bot` (errbot venv/config/process), `irc_client` (a person on IRC),
`procs` (child processes by PID), `stack` (all of it for `fleet-rollout lab up --chatops`: st2
users, the runtime's st2 API with the `st2pack/` notify rule, ngircd, errbot).
CLI: `python -m fleet_lab.chatops up|down|say`.
"""
