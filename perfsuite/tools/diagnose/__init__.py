"""`perfsuite diagnose`, measured in stages within a time budget: run (the diagnosis from check-data to
the last stage), plan (the budget, the stages and their rounds), views (the dataset as measured), stages
(what each stage measures). What a diagnosis holds and its wording live in verdict/diagnosis_figures.py
and verdict/diagnosis.py."""
