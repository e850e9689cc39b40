"""The one exception type for errors a user can cause."""


class LandscapeError(Exception):
    """A user-caused error with a one-line message that says what to do.

    The CLI prints the message without a traceback and exits with status 2.
    """
