"""The frontend: einsum expressions and the contraction descriptions they imply."""
