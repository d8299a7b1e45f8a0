"""Every error the analysis side raises; the CLI turns them into one-line messages."""

from recorders.vocabulary import PostmortemError, RunDirectoryError

__all__ = ["PostmortemError", "RunDirectoryError", "SchemaVersionError"]


class SchemaVersionError(PostmortemError):
    """The run was written with a schema version this analyzer does not understand."""
