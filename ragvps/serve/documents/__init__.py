"""Documents in and out over HTTP: uploads, their jobs and the workers that run them, the documents stored."""
