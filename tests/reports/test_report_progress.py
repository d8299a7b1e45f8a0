import io

from reports import Progress


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_silent_when_not_a_terminal():
    stream = io.StringIO()
    progress = Progress(3, stream=stream)
    progress.advance("loading run")
    progress.close()
    assert stream.getvalue() == ""


def test_draws_and_clears_on_a_terminal():
    stream = _Terminal()
    progress = Progress(4, stream=stream)
    progress.advance("loading run")
    progress.advance("analysing")
    assert "[############............] 2/4 analysing" in stream.getvalue()
    progress.close()
    assert stream.getvalue().endswith("\r")
