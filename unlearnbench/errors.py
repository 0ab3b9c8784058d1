"""The one exception type that reaches users as a single line instead of a traceback."""


class UserError(Exception):
    """Bad input: the message says what is wrong and what is valid.

    Jobs catch it, record it in `result.json` and print its message alone; anything else is a bug and keeps its
    traceback in the job log.
    """
