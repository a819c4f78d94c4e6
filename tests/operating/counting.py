"""A counting backend for the operating tests: graphs compiled and calls of compiled code, the
two figures compared with torch.compile's on the same program."""


class Counting:
    def __init__(self):
        self.compiles = 0
        self.runs = 0

    def __call__(self, gm, example_inputs):
        self.compiles += 1

        def run(*args):
            self.runs += 1
            return gm.forward(*args)
        return run

    def counts(self):
        return self.compiles, self.runs
