"""The catalogue: where the models a host serves come from, what each is, and which one a request gets.

    spec.py      ModelSpec: a servable model as configured (where, names, its own limits)
    tasks.py     what a model is for (generate, embed, rerank), as its files say
    ranks.py     a model served by a group of MLX ranks
    sources.py   a model's files: a directory, the Hugging Face cache, the demo models
    hub.py       pulling a repo from the Hugging Face Hub (huggingface_hub): which files, the
                 disk check, resumption, verification, errors that name the repo
    library.py   what is on disk: the cache's repos and the state directory's outputs
    routing.py   route(model, task): the one decision of which model serves a request

Nothing here imports MLX or the parent: the parent, the CLI, the job process and the worker all
read it.
"""
