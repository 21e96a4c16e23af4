"""A choice's text as its tokens arrive: decoded after a few of the prompt's last tokens (so
a first piece keeps its leading space, as it reads after the prompt), held back while it
ends in an unfinished character or in what could start a stop string, and cut before the
first stop string."""

CONTEXT_TOKENS = 8  # prompt tokens decoded before the output


class Text:
  def __init__(self, tokenizer, prompt, stops):
    self.tokenizer, self.stops = tokenizer, stops
    self.context = list(prompt[-CONTEXT_TOKENS:])
    self._base = tokenizer.decode(self.context)
    self.ids, self.sent, self.stopped = [], 0, None
    self.text = ''  # the whole text so far, cut at a stop string

  def add(self, token):
    """Takes a token -> the text that can be sent now ('' while held back). Sets
    `stopped` to the stop string found, if any."""
    self.ids.append(token)
    whole = self.tokenizer.decode(self.context + self.ids)
    text = (whole[len(self._base):] if whole.startswith(self._base)
            else self.tokenizer.decode(self.ids))
    found = [(text.find(s), s) for s in self.stops if s in text]
    if found:
      at, self.stopped = min(found)
      self.text = text[:at]
      return self._release(len(self.text))
    self.text = text
    if text.endswith('\ufffd'):  # a character whose bytes are not all out yet
      return ''
    hold = max((len(s) - 1 for s in self.stops), default=0)
    return self._release(max(len(text) - hold, self.sent))

  def rest(self):
    """The text not yet sent (at the end of the choice)."""
    return self._release(len(self.text))

  def _release(self, upto):
    out = self.text[self.sent:upto]
    self.sent = max(self.sent, upto)
    return out
