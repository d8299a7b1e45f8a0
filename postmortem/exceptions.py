"""Every error the analysis side raises; the CLI turns them into one-line messages."""

__all__ = ["PostmortemError", "RunDirectoryError", "SchemaVersionError"]


class PostmortemError(Exception):
    """Base class of all postmortem errors."""


class RunDirectoryError(PostmortemError):
    """The path is not a readable run directory (missing, not a directory, no segments)."""


class SchemaVersionError(PostmortemError):
    """The run was written with a schema version this analyzer does not understand."""
