"""`doctor train`'s supervisor: run a job, diagnose a failure, change what the diagnosis calls for, resume."""
