"""Workers on other hosts over SSH, with OpenSSH's configuration semantics."""
