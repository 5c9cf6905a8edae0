"""The link: federating two buses over a byte stream or message transport."""
