"""The run explorer (issue 33): the JSON API of the run, step and sample views, and the page that draws them."""
