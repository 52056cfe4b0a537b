"""The examples in the public docstrings run and print what they show."""

import doctest

import pytest

import combolayer as cl
from combolayer.specs import files
from combolayer.training import loop as training

DOCUMENTED = [cl.ComboLayer, cl.ComboLayer.from_config, cl.make_solver,
              cl.analyze, cl.ILP, cl.load_spec, cl.metrics, cl.losses, cl.data,
              cl.Identity, cl.Blackbox, cl.Perturbed, cl.IMLE, cl.problems.TSP,
              cl.problems.Matching, cl.problems.Knapsack, cl.problems.TopK,
              cl.problems.Ranking, cl.problems.ShortestPath]


@pytest.mark.parametrize("obj", DOCUMENTED, ids=lambda o: getattr(o, "__qualname__", o.__name__))
def test_docstring_examples(obj):
    assert "Examples:" in obj.__doc__
    finder = doctest.DocTestFinder(recurse=False)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    for test in finder.find(obj, globs={"cl": cl}):
        runner.run(test)
    assert runner.failures == 0 and runner.tries > 0


@pytest.mark.parametrize("obj", [cl.ComboLayer, cl.make_solver, cl.analyze, cl.load_spec,
                                 cl.ComboLayer.forward, files.read_model, training.load_config])
def test_docstrings_say_what_is_raised(obj):
    assert "Raises:" in obj.__doc__
