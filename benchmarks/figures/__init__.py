"""The paper's figures on our data (stride, query length, context length, retrievers, number of documents for QA):
resumable sweeps that write one CSV row per point and draw a PNG from the CSV (:mod:`.sweep`, :mod:`.plotting`)."""
