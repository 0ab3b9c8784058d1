from unlearnbench.cli import main

main()
