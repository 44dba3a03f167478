"""The data stage: real text -> documents -> WordPiece tokens -> fixed-length sequences.

One packed sequence is one privacy unit ("user", paper §2: each individual
contributes a single sequence of S tokens).
"""
