"""Errors that reach the user as one clear line (the CLI prints them without a traceback)."""


class UserError(Exception):
    """Bad input from the user: a checkpoint, a flag, a data file. The message names the problem."""

    exit_code = 2


class DoesNotFitError(UserError):
    """The exported model does not fit the board; the files were still written for inspection."""

    exit_code = 3


class BelowSmallestError(UserError):
    """A size budget below the smallest configuration that exists; `smallest` is that one's size."""

    def __init__(self, message: str, smallest: int):
        super().__init__(message)
        self.smallest = smallest
