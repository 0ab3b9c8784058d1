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


def invalid(option: str, owner: str, valid: str, got: object, kind: str = "option",
            error: type[UserError] = UserError) -> UserError:
    """Bad input in scikit-learn's words: "the 'x' option of Y must be …; got … instead" (`kind`: what 'x' is, an
    option, or an entry of a method's search space; `error`: the UserError's type, where a caller catches a kind of
    its own)."""
    return error(f"the {option!r} {kind} of {owner} must be {valid}; got {got} instead")


def bad_file(path: object, problem: str, error: type[UserError] = UserError) -> UserError:
    """Bad input where a file is at fault: "file F: …", the problem saying what is wrong and what is valid (`error`:
    as `invalid`'s)."""
    return error(f"file {path}: {problem}")


class EndSweep(BaseException):
    """A refusal or a fault that ends the whole sweep, not one job: a sweep's option out of range, a result that
    cannot be written. Raised from where Hydra catches every Exception (its callbacks, launchers and sweepers would
    print a traceback; its job runner would record one failed job and go on), it is a BaseException, as
    KeyboardInterrupt is, so that none of them stops it; `unlearnbench.cli` prints its message and exits 1."""
