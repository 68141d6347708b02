"""Code the lessons (notebooks/*.ipynb) share, shipped once in the package so a lesson imports it
instead of pasting it: :mod:`mwnotebook.course.seed_program`, the two-worker training program the
course starts from (lesson 01 prints it and runs it; lessons 04, 06 and 10 run it elsewhere)."""
