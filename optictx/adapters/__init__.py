"""Framework adapters, each in its own module and extra, imported only when asked for:
`optictx.adapters.langchain` (`optictx[langchain]`) and `optictx.adapters.llama_index`
(`optictx[llamaindex]`). Nothing else in optictx imports them."""
