"""The one exception type that reaches users as a single line instead of a traceback."""


class UserError(Exception):
    """Bad input: the message says what is wrong and what is valid.

    Jobs catch it, record it in `result.json` and print its message alone; anything else is a bug and keeps its
    traceback in the job log.
    """


class FileOnly:
    """A logging filter for console handlers: it drops records logged with `extra=FILE_ONLY` (the traceback of a
    failed job or method), which then reach the job's log file but not the terminal, where one line says it."""

    def filter(self, record) -> bool:
        return not getattr(record, "file_only", False)


FILE_ONLY = {"file_only": True}


def invalid(option: str, owner: str, valid: str, got: object) -> UserError:
    """Bad input in scikit-learn's words: "the 'x' option of Y must be …; got … instead"."""
    return UserError(f"the {option!r} option of {owner} must be {valid}; got {got} instead")
