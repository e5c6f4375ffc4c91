"""A job's settings and config: Hydra's compose and the shipped folders (config), the typed and
checked settings (settings), the systems a job plans from its stage sections (systems) and the
loaded inputs (inputs). Imports only the records room, the plugin registry and redaction below it."""
