"""What every request passes before a door: keys and people (access, auth, people, oidc, session, signin, principal),
Host and Origin checks (guard), body limits (limits), the request log and the audit log."""
