"""Exceptions shared across dpscaling."""


class UserError(ValueError):
    """Bad input a user can fix; the message names the field and the accepted values."""
