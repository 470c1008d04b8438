"""Recording: run changes written to the database in batches (``writer``,
``write_batch``: a refused row never holds the others back, nothing lost
while the database is down) and each attempt's outcome marked in the
coordinator at once (``outcome_marks``). May import the shared modules only.
"""
