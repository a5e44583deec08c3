"""One module per `doctor` subcommand; each exposes a click command named `command`."""
