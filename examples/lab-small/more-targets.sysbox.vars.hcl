# sysbox plan -var-file more-targets.sysbox.vars.hcl
targets = 4
